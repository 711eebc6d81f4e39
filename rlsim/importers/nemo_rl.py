"""NeMo-RL → rlsim: the keys `rlsim import nemo-rl` reads, their defaults, and the conversion."""
