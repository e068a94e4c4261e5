"""The outside worlds porting-kit talks to, one module each: HF transformers
(reference loading), vLLM-Omni and SGLang-Omni (targets, their schemas, the
engine contract)."""
