"""Every agent that plays the benchmark: the contract (:mod:`rhythm.agents.base`), baselines, the built-in
teachers, the episode runner (:mod:`rhythm.agents.episodes`), the tiny student by name, built from the
built-in agents' text (:mod:`rhythm.agents.tiny`), chat-endpoint agents, the student (``model:PATH``)
and, on top, the registry by name (:mod:`rhythm.agents.registry`)."""
