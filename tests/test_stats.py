import torch

from elfreg.stats import FeatureStats, RunningStats


def test_running_stats_match_torch():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(4, 10, 3, generator=g) * torch.tensor([1.0, 2.0, 0.5]) + torch.tensor([3.0, -1.0, 0.0])
    mask = torch.rand(4, 10, generator=g) > 0.3
    rs = RunningStats(3)
    rs.update(h[:2], mask[:2])
    rs.update(h[2:], mask[2:])
    st = rs.finalize()
    sel = h[mask]
    assert torch.allclose(st.mean, sel.mean(0), atol=1e-5)
    assert torch.allclose(st.std, sel.std(0), atol=1e-5)
    z = st.standardize(sel)
    assert torch.allclose(z.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(st.unstandardize(z), sel, atol=1e-5)


def test_standardize_reads_half_and_bf16_inputs_as_fp32():
    g = torch.Generator().manual_seed(1)
    st = FeatureStats(torch.randn(8, generator=g), torch.rand(8, generator=g) + 0.5)
    for dtype in (torch.float16, torch.bfloat16):
        h = torch.randn(5, 8, generator=g).to(dtype)
        got = st.standardize(h)
        assert got.dtype == torch.float32
        assert torch.equal(got, (h.float() - st.mean) / st.std)  # bit for bit the fp32 formula on h.float()


def test_roundtrip_tensors():
    st = FeatureStats(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    back = FeatureStats.from_tensors(st.to_tensors("x"), "x")
    assert torch.equal(back.mean, st.mean) and torch.equal(back.std, st.std)
    assert FeatureStats.from_tensors({}, "reg") is None
