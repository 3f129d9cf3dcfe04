"""Language-model plumbing shared by eval and training: lockstep chat generation with a kept KV cache."""
