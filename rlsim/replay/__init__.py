"""A training run's logged steps against the simulation of the same steps (`rlsim replay`), and framework parameters
fitted to them (`rlsim fit`)."""
