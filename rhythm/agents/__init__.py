"""Every agent that plays the benchmark: the contract (:mod:`rhythm.agents.base`), baselines, the built-in
teachers, chat-endpoint agents, the student (``model:PATH``) and, on top, the registry by name
(:mod:`rhythm.agents.registry`)."""
