"""Linear attention: gated DeltaNet (Qwen3-Next's), plain causal linear attention, Mamba-2's SSD and Kimi Delta
Attention, prefill and decode.

  shape      LinearShape: the sizes, method and phase of one call, validated once
  inputs     the call's tensors, drawn for a shape
  reference  the float64 recurrence, token by token, every implementation is checked against
  backends   the timed implementations (transformers' torch paths, a torch chunk form, flash-linear-attention)
  hf_ssm     transformers' torch paths of Mamba-2's SSD and Kimi Delta Attention, in backends' signature
  counts     FLOPs of the chunked algorithms and of the recurrence, and the state's bytes

Nothing here imports torch at import time except reference (its oracle is torch code).
"""
