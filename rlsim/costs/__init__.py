"""Cost models: pure functions of (model, hardware, shapes) returning seconds and bytes. No SimPy here.

Every memo in this package is a `rlsim.costs.memo.Memo` (why that style: its module docstring)."""
