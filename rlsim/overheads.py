"""Overheads real RL stacks pay that a first-principles GPU model lacks — CPU work of the engines and the driver, the
share of the kernel rates a training step sustains, host copies into pageable memory — as measured constants, each
with its source. The scenario's `framework:` section defaults to them (rlsim.config.framework) and the cost models'
plain values do too (rlsim.costs), so both read them here, below either."""

# CPU work of one engine step that is not kernel launching: scheduling, preparing the step's inputs, processing the
# sampled tokens. vLLM V1 serving Llama-3.2-1B with about one request in flight decodes at a median TPOT of 2.64 ms
# (vllm-project/vllm#17866, baseline before its fast path, no async scheduling); rlsim's cost model puts the GPU share
# of that step at 1.15 ms on an H100 (the GPU of that PR is assumed), leaving ~1.5 ms of CPU per step. (vLLM V0 left
# bubbles of ~4 ms, 5-13 ms in general: vllm-project/vllm#6854.)
ENGINE_STEP_CPU_S = 1.5e-3
# The part of an engine step's CPU work that grows with the sequences it schedules (per-request scheduling, input
# metadata, sampled-token bookkeeping). vLLM V1 without async scheduling, Llama-2-7B at batch 256 on ShareGPT, left
# "about 5-6ms" between two decode steps (vllm-project/vllm#10634, on V1's AsyncLLM of PR #9826; the prototype of
# PR #11133 overlapping that work cut it to 0.15 ms). Less the fixed ~1.5 ms above, 5.5 ms over 256 sequences is
# 15.6 us per sequence.
ENGINE_STEP_CPU_PER_SEQUENCE_S = (5.5e-3 - ENGINE_STEP_CPU_S) / 256
# CPU time to launch one kernel outside a CUDA graph: "usually, the launch time on the CPU side is between 5-20
# microseconds" (facebookresearch/HolisticTraceAnalysis, docs features/cuda_kernel_launch_stats.rst); the geometric
# middle of that range. It prices the launches of compiled code (a vLLM iteration larger than its captured graphs runs
# torch.compile's generated code) and of an SGLang engine's kernels; vLLM's eager mode pays EAGER_OP_CPU_S instead.
KERNEL_LAUNCH_S = 10e-6
# CPU time per kernel vLLM launches in eager mode (enforce_eager: no CUDA graphs, no torch.compile), the launch and the
# Python around it: each op goes through nn.Module calls, vLLM's layer wrappers (CustomOp dispatch, the quant method of
# a linear layer, the attention custom op's forward-context lookup) and PyTorch's dispatcher, and the layer's ops that
# launch nothing (views, splits, empty_like) share out over the ones that do. Evidence: the launch alone takes 5-20 us
# (HolisticTraceAnalysis, above); one bare torch.nn.Linear forward takes 13.48 us of CPU on a DGX H100's Xeon 8480C
# (NVIDIA/TransformerEngine#2053), a floor for an op wrapped by vLLM's layers; an eager Llama-3.1-8B decode step on an
# H100 takes 8.4 ms against 5.1 ms with CUDA graphs, about 260 us of CPU per decoder layer or 22 us per kernel launched
# (cloudai.pt blog, batch not stated: weak). Together they put the cost at 20-25 us on x86; no profiler trace of an
# eager vLLM V1 step pins it closer, so this takes the middle of that range rather than the value any one published
# eager/graph pair would want (docs/background/cost-models.md compares them).
EAGER_OP_CPU_S = 22.5e-6
# GPU-side gap between consecutive kernels, charged per kernel in every mode: ~0.58 µs per node when a CUDA graph
# replays a chain of empty kernels (ahrefs/ocannl#488: graph replay ≈ 15 µs fixed + 0.58 µs per node, vs 6.4 µs per
# individual launch).
KERNEL_GAP_S = 0.6e-6
# Python work of the RL driver in every step outside its timed stages: advantages (verl's timing_s/adv) and the batch
# bookkeeping between stages (the rest of timing_s/step). verl-project/verl#7412 logs a GRPO step of 1163.957 s whose
# stages sum to 1163.565 s, adv 0.037 s among them: 0.037 s + 0.355 s unaccounted for. (Other public verl step logs show
# 0.03-1.5 s; the overhead hardly grows with the batch.)
TRAINER_STEP_OVERHEAD_S = 0.037 + 0.355
# The share of the modelled kernel rates that training and log-prob passes sustain over a whole step (the model prices
# each GEMM, attention and memory-bound kernel at its own measured rate). llm-foundry's H100 BF16 table
# (mosaicml/llm-foundry scripts/train/benchmarking/README.md: 32 FSDP runs of MPT 3B-70B, 512-65,536 tokens, with and
# without activation checkpointing) measures MFU at a median 0.894 of what rlsim's training model gives for the same
# layouts (calibration/training_efficiency.py; checkpointed runs 0.92, the others 0.86). Nothing in the per-kernel
# pricing accounts for the difference.
TRAINING_KERNEL_EFFICIENCY = 0.89
# The same share for Megatron-Core's training step (backend: megatron), whose kernels rlsim prices apart (cuDNN fused
# attention, TransformerEngine's fused elementwise work): Megatron-Bridge's published BF16 pretraining of the catalog's
# models measures tokens/s/GPU at a median 0.81 of rlsim's model at full kernel rates (calibration/megatron_bridge.py:
# Qwen3-8B and Qwen3-30B-A3B on 16 H100s from the model-verification cards, Qwen3-235B-A22B and DeepSeek-V3 on 256
# GB200s from the performance summary).
MEGATRON_KERNEL_EFFICIENCY = 0.81
# Copying state out to fresh pageable host memory with a blocking `tensor.to("cpu")`, tensor by tensor (a non-blocking
# one allocates pinned memory instead: PyTorch's _to_copy sets pin_out for non_blocking CUDA-to-CPU copies). On an H100,
# Nsight times NeMo-RL's optimizer offload before refit at 510 Device->Pageable copies, 4.94 GB in 2.75 s of copy time:
# 1.8 GB/s, where the same host copies 1 GiB into warm pageable memory at 16.1 GB/s and into pinned at 55 GB/s
# (NVIDIA-NeMo/RL#3976). Other Hopper hosts agree: an H20 moved a 63 GB module out with .to("cpu") in 27.2 s, 2.3 GB/s
# (vllm-project/vllm-omni#5922), an H200 offloaded at "only ~2.8 GB/s" (sgl-project/sglang#32032).
PAGEABLE_COPY_OUT_BYTES_PER_S = 1.8e9
# Copying state back from pageable host memory (the driver stages it through its own pinned buffer): the same H20
# module came back with .to(device) in 7.5 s, 8.4 GB/s (vllm-project/vllm-omni#5922).
PAGEABLE_COPY_IN_BYTES_PER_S = 63e9 / 7.5
# vLLM captures CUDA graphs for batches of 1, 2, 4 and then multiples of 8 tokens up to 512 by default
# (CompilationConfig cudagraph_capture_sizes / max_cudagraph_capture_size); larger iterations run eagerly.
CUDA_GRAPH_MAX_TOKENS = 512
# Whether an engine prepares the next step on the CPU while the GPU computes this one, by engine, as each ships by
# default: SGLang's overlap scheduler is on since v0.4 ("zero-overhead batch scheduler", lmsys.org/blog/2024-12-04-
# sglang-v0-4, --disable-overlap-schedule turns it off); vLLM's async scheduling (vllm-project/vllm#19970) is opt-in
# (--async-scheduling), so a vLLM engine pays its step's CPU time between GPU steps. Hugging Face generate() cannot
# overlap: every step asks the GPU whether all rows have finished before it starts the next (transformers'
# `_has_unfinished_sequences`, a device-to-host sync).
OVERLAP_BY_ENGINE = {"sglang": True, "vllm": False, "hf": False}
# Bytes per second at which an RL driver hands a batch to its training workers and back (single-controller frameworks:
# verl's DataProto is consolidated and `torch.save`d on the driver, put through Ray, and `torch.load`ed on each worker,
# verl/protocol.py __getstate__/__setstate__). verl PR #3425 (verl-project/verl) timed a batch "of 6400x20480" at 2.58 s
# to serialize on the driver and 0.74 s to deserialize on a worker (the workers in parallel): 3.32 s. Read as 6,400
# sequences padded to 20,480 tokens with verl's rollout fields (prompts and responses, input_ids, attention_mask,
# position_ids: four int64 tensors over the padded width), that is 4.19 GB in 3.32 s. Weak: the PR does not list the
# batch's fields, and Ray's own copy through its object store is not in the timing.
DRIVER_BATCH_BYTES_PER_S = 6400 * 20480 * 4 * 8 / 3.32
