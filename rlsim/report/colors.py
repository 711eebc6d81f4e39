"""One colour per label of the idle taxonomy, shared by every figure, so a label looks the same everywhere.

Busy work is in blues and greens, communication in purples, memory traffic in browns, and idle time in warm colours
(the tail and starvation stand out) or greys (time nobody asked for)."""
from __future__ import annotations

LABEL_COLORS = {
    "prefill": "#9ecae1",
    "decode": "#3182bd",
    "logprob": "#74c476",
    "train_forward": "#31a354",
    "train_backward": "#006d2c",
    "optimizer": "#0b4d2b",
    "reward_model": "#17becf",
    "weight_sync": "#9467bd",
    "reshard": "#c5b0d5",
    "exposed_collective": "#6a3d9a",
    "offload": "#8c564b",
    "reload": "#c49c94",
    "tail": "#ff7f0e",
    "env_wait": "#fdae6b",
    "starved": "#d62728",
    "barrier": "#e7ba52",
    "staleness_block": "#e377c2",
    "pipeline_bubble": "#bdbdbd",
    "unassigned": "#e8e8e8",
}

# chrome://tracing's named colours (Perfetto colours slices by name instead, which is the label here).
LABEL_CNAMES = {
    "prefill": "thread_state_runnable",
    "decode": "thread_state_running",
    "logprob": "good",
    "train_forward": "good",
    "train_backward": "olive",
    "optimizer": "olive",
    "reward_model": "rail_load",
    "weight_sync": "rail_animation",
    "reshard": "rail_animation",
    "exposed_collective": "rail_response",
    "offload": "thread_state_iowait",
    "reload": "thread_state_iowait",
    "tail": "bad",
    "env_wait": "bad",
    "starved": "terrible",
    "barrier": "yellow",
    "staleness_block": "bad",
    "pipeline_bubble": "grey",
    "unassigned": "white",
}
