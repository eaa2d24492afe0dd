"""Model presets: the attention geometry of well-known models, read from bench/models/configs/<name>.json.

Each preset is a HuggingFace-style config.json (or, for models without one, a file in the same schema whose
`_source` names the paper), read by bench.models.config like any user's config: one source of model facts, with where
each number comes from in its `source`.
"""

from __future__ import annotations

from bench.models.config import ModelConfig
from bench.models.config_json import PRESET_NAMES, preset_config

ModelPreset = ModelConfig  # a preset is the ModelConfig read from its file

PRESETS: dict[str, ModelConfig] = {name: preset_config(name) for name in PRESET_NAMES}


def preset(name: str) -> ModelConfig:
    """The preset called `name`; an unknown name is a UsageError listing the known ones."""
    return PRESETS[name] if name in PRESETS else preset_config(name)
