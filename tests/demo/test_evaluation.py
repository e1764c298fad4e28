"""The demo's evaluation runs the generation pipeline (elfreg.demo.evaluation): the same responses, exit times, NFE
and settled flags as the batch loop over the sampler it replaced, for every sampler, in batches that do not divide
the test set."""

import pytest
import torch
from helpers import make_tiny_elf_model

from elfreg.demo.cli import demo_config
from elfreg.demo.evaluation import encode_test, sample_texts_nfe, sampler_config
from elfreg.demo.prepare import task_config, task_module, task_rows
from elfreg.pretrained import ElfModel
from elfreg.sampling.decode import text_answers
from elfreg.tasks.answers import extractor
from elfreg.sampling.decode import detokenize, response_token_ids
from elfreg.sampling.samplers import sample


def _sampler_loop(model, x, mask, scfg, batch_size):
    """The demo's evaluation before it ran the pipeline: the sampler called batch by batch, row i under key (i, 0)."""
    texts, exits, nfe, settled = [], [], [], []
    for b in range(0, x.shape[0], batch_size):
        idx = list(range(b, min(b + batch_size, x.shape[0])))
        answer_of = None
        if scfg.sampler == "adaptive":
            answer_of = text_answers(model.tokenizer, mask[idx], extractor(scfg.extract))
        res = sample(model.student, x[idx], mask[idx], scfg, keys=[(i, 0) for i in idx], answer_of=answer_of)
        texts += detokenize(model.tokenizer, response_token_ids(res.token_ids, mask[idx], model.tokenizer.eos_token_id))
        exits += res.exit_time.tolist()
        nfe += res.nfe
        settled += res.settled if res.settled is not None else [None] * len(idx)
    return texts, exits, nfe, settled


@pytest.fixture(scope="module")
def demo_student(tiny_lm_dir, tmp_path_factory):
    cfg = demo_config(True, [])
    task = task_module(cfg)
    rows = task_rows(task.make_split(7, 0, "test", task_config(cfg)), task)
    model = ElfModel.from_pretrained(make_tiny_elf_model(tmp_path_factory.mktemp("demo_student"), tiny_lm_dir, seed=3))
    model.student.eval()
    x, mask, _ = encode_test(model, rows)
    return cfg, model, x, mask


@pytest.mark.parametrize("sampler", ["full-span", "early-stop", "renoise", "adaptive"])
def test_the_pipeline_gives_what_the_sampler_loop_gave_bit_for_bit(demo_student, sampler, one_thread):
    cfg, model, x, mask = demo_student
    for seed in (0, 1):
        scfg = sampler_config(model, cfg, sampler, 4 if sampler != "adaptive" else 12, seed)
        torch.manual_seed(0)  # neither may draw from the global generator: its state must not matter
        new = sample_texts_nfe(model, x, mask, scfg, batch_size=3)
        torch.manual_seed(1)
        old = _sampler_loop(model, x, mask, scfg, batch_size=3)
        assert new == old
        assert len(new[0]) == 7 and any(new[0])  # responses, not empty strings


def test_a_batch_larger_than_the_test_set_is_one_batch(demo_student, one_thread):
    cfg, model, x, mask = demo_student
    scfg = sampler_config(model, cfg, "early-stop", 4, 0)
    assert sample_texts_nfe(model, x, mask, scfg, batch_size=100) == _sampler_loop(model, x, mask, scfg, 7)
