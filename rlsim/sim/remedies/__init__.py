"""The controllers of the long-tail remedies (`schedule.long_tail`), one module each; their parameters, checks and
facts are registered in rlsim/sim/long_tail/, which imports these only when a run builds one."""
