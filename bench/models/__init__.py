"""Models: the attention facts of a model (config), read from config.json files (config_json), the shipped presets
(presets, configs/*.json) and the KV cache they size (kvcache)."""
