"""`conch plan`: how many instances a fleet of ensembles needs behind SageMaker MMEs, and what it costs."""
