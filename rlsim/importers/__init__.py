"""Import a verl or NeMo-RL run's configuration as an rlsim scenario (`rlsim import`): read the framework's files
(`settings`, `script`), translate them key by key (`mapping`, `verl`, `nemo_rl`) and write the scenario with where each
field came from (`writer`). Config level: nothing here runs a simulation."""
