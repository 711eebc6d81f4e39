"""The pricing seam: a resolved scenario turned into what the cost models take and asked what the simulation and the
estimate need priced.

`rlsim.costs` prices plain layouts it owns (`rlsim.costs.layout`) and never sees a scenario. This package is the one
place that reads the scenario's config classes for them: the layouts of every GPU role (`layouts`), the engines'
cost models and KV budgets (`engines`), memory per role and what would fit (`memory`), and the weight movements of the
placement (`weight_sync`). The simulation (`rlsim.sim.build`), the estimate and the metrics all price through it, so
they price alike.
"""
