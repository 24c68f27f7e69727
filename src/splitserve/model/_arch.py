"""What llama.cpp does per architecture that the GGUF header does not say outright.

Read from the pinned llama.cpp (``src/models/<arch>.cpp``, ``src/llama-model.cpp``): the default
sliding-window pattern each architecture passes to ``load_swa_pattern``, and the architectures
whose KV geometry the generic rules below describe exactly.  Anything else is planned with the
generic rules and marked *estimated*.
"""

from __future__ import annotations

#: (pattern, dense_first) passed to ``load_swa_pattern`` when the GGUF has no
#: ``<arch>.attention.sliding_window_pattern``; SWA applies only when ``sliding_window`` > 0.
SWA_DEFAULT_PATTERN: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False),
    "gemma3": (6, False),
    "gemma-embedding": (6, False),
    "gemma3n": (5, False),
    "cohere2": (4, False),
    "exaone4": (4, False),
    "llama4": (4, False),
    "olmo2": (4, False),
    "gpt-oss": (2, False),
    "afmoe": (4, False),
    "plamo3": (8, False),
    "smallthinker": (4, True),
    "phi3": (1, False),
}

#: architectures whose every layer has a plain (GQA/MQA, SWA or MLA) KV cache, so the generic
#: geometry is what llama.cpp allocates; MiniMax-M3 adds its indexer cache (handled in _model).
KNOWN_ARCHS = frozenset(
    {
        "llama",
        "mistral3",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "gemma",
        "gemma2",
        "gemma3",
        "phi3",
        "granite",
        "granitemoe",
        "olmo2",
        "cohere2",
        "exaone4",
        "deepseek2",
        "glm4",
        "glm4moe",
        "minimax-m2",
        "minimax-m3",
        "gpt-oss",
        "llama4",
        "ernie4_5",
        "ernie4_5-moe",
        "smollm3",
        "hunyuan-moe",
        "starcoder2",
        "command-r",
        "internlm2",
        "stablelm",
        "bailingmoe",
        "dots1",
        "seed_oss",
    }
)


#: architectures whose model code in the pinned llama.cpp builds an MTP graph
#: (``LLM_GRAPH_TYPE_DECODER_MTP`` in ``src/models/<arch>.cpp``): ``--spec-type draft-mtp`` runs their
#: ``blk.N.nextn.*`` layers as the draft.  Others may carry nextn tensors (glm4, exaone4,
#: bailingmoe2, dots3note, nemotron_h) that llama.cpp loads but cannot draft with; MiniMax-M3's
#: released weights have none ("MTP is not in released model weights", ``minimax-m3.cpp``).
MTP_ARCHS = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm-dsa",
        "glm4moe",
        "glm5-next",
        "hy_v3",
        "mimo2",
        "nemotron_h_moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "qwen4exp",
        "step35",
    }
)


def swa_layers(arch: str, n_layer: int, n_swa: int, pattern: object) -> list[bool]:
    """Which layers use the sliding window, the way ``llama_hparams::set_swa_pattern`` decides."""
    if n_swa <= 0:
        return [False] * n_layer
    if isinstance(pattern, list):
        flags = [bool(x) for x in pattern][:n_layer]
        return flags + [False] * (n_layer - len(flags))
    dense_first = False
    if isinstance(pattern, int):
        n = pattern
        dense_first = SWA_DEFAULT_PATTERN.get(arch, (0, False))[1]
    elif arch in SWA_DEFAULT_PATTERN:
        n, dense_first = SWA_DEFAULT_PATTERN[arch]
    else:
        return [False] * n_layer
    if dense_first:
        return [n == 0 or (il % n != 0) for il in range(n_layer)]
    return [n == 0 or (il % n < n - 1) for il in range(n_layer)]
