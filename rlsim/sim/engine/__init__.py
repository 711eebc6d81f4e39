"""The parts a rollout engine (`rlsim.sim.rollout.RolloutEngine`) is made of: the `scheduler` (its queue, its running
sequences, admission and preemption), a running sequence's `slot`, the `kv_ledger` (what the KV cache holds and
whether an admission fits), the `decode_batch` (the fixed batch between batch-changing events, and the fast-advance
stretch over it), the `preemption_chain` (the boundaries a full cache forces on that batch, planned in closed form), the
`prefill_run` (long prefills' chunks over that batch, planned likewise),
the `lifecycle` of a sequence between iterations (queued, first token, turn end, tool return), `tool_waits`
(multi-turn trajectories during their tool calls), the engine's `state` (what its process is doing, and the pause
asked of it) and its `telemetry` (samples, busy spans, probe)."""
