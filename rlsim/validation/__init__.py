"""Validation against published measurements of real RL training runs: the cases in scenarios/validation/cases.yaml,
the figures simulated for them, their errors, and the table and parity plot in docs/validation.md."""
