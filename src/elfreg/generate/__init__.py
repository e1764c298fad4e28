"""`elfreg generate`: the command over the sampling library (:mod:`elfreg.sampling`) and the model loader
(:mod:`elfreg.loading`)."""
