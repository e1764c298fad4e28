"""The generation run's own types live below the model layer: the sampling package imports neither the loader
(elfreg.loading), nor ElfModel (elfreg.pretrained), nor any command."""

from helpers import imports_of, modules_after, within

ABOVE = ("elfreg.loading", "elfreg.pretrained", "elfreg.hub", "elfreg.cli", "elfreg.generate", "elfreg.eval",
         "elfreg.serve", "elfreg.diagnose", "elfreg.demo", "elfreg.train")


def test_the_sampling_package_names_no_model_layer_and_no_command():
    assert within(imports_of("elfreg.sampling"), ABOVE) == []


def test_importing_the_sampling_package_loads_no_model_layer_and_no_command():
    loaded = modules_after("import elfreg.sampling, elfreg.sampling.generate, elfreg.sampling.flags, "
                           "elfreg.sampling.files")
    assert within(loaded, ABOVE) == []
