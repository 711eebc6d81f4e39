"""Cost models: pure functions of (model, hardware, shapes) returning seconds and bytes. No SimPy here."""
