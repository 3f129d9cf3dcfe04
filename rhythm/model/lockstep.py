"""Lockstep chat generation with one key/value cache per batch of conversations: the engine behind
``model:PATH`` eval and GRPO's episode rollouts.

Protocol v2 makes one episode one conversation, so step ``t``'s prompt is step ``t-1``'s prompt plus
the reply and one new user turn. :class:`LockstepChat` keeps every conversation's keys and values
across turns: each step it *prefills only the new text* (the last reply, re-tokenised as the chat
template writes it, and the new observation) and then decodes the reply, all episodes of the batch at
once. After decoding, the cache is cut back to where the reply began, so the next prefill re-encodes
the reply text canonically: every episode's context is then exactly the token ids of its rendered
conversation, the same ids a loop that re-encodes the whole conversation every step would feed (what
a plain transformers loop does; a test holds the greedy replies equal), and the same ids SFT trained on.

Ragged turns share one cache by masking: each new chunk is left-padded to the batch's widest, pads are
masked out of attention, and position ids count only real tokens, so an episode's logits do not depend
on its batch neighbours beyond float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rhythm.errors import RhythmError


@dataclass
class Turn:
    """One reply: its text, its token ids (up to and including the stop token), and the prompt ids
    it answered (the whole conversation so far, as the model saw it)."""

    text: str
    completion_ids: list[int]
    prompt_ids: list[int]
    cut: bool = False
    """The reply reached ``max_new_tokens`` before a stop token: cut short, whatever it would have said after."""


def check_appends(tokenizer: Any) -> None:
    """Refuse a chat template that rewrites earlier turns when one is added (some move the system prompt into the
    newest user turn): a week is played as one growing conversation whose cache keeps what was rendered before."""
    from jinja2 import TemplateError

    name = getattr(tokenizer, "name_or_path", "this tokenizer")
    turns = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}]
    try:
        first = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        turns += [{"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]
        appended = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False).startswith(first)
    except TemplateError as err:  # e.g. a template that takes no system turn, which the protocol's weeks open with
        raise RhythmError(f"the chat template of {name!r} cannot render a week ({err})") from None
    if not appended:
        raise RhythmError(f"the chat template of {name!r} rewrites earlier turns when one is added; a model plays a "
                          "week as one growing conversation, which needs a template that only appends")


class LockstepChat:
    """Generates the next reply of ``n`` conversations at once, keeping their KV cache across turns.

    ``step(conversations)`` takes each conversation ending on its newest user turn and returns one
    :class:`Turn` per conversation. Each conversation must extend the one of the previous step: the
    earlier turns unchanged, then the last reply (any text; it is re-encoded, so it need not be the
    generated one) and the new user turn. Greedy unless ``do_sample``; sampling uses ``generator``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        stop_ids: Sequence[int],
        max_new_tokens: int,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> None:
        check_appends(tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        self.stop_ids = sorted({int(i) for i in stop_ids})
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0])
        self.max_new_tokens = int(max_new_tokens)
        self.do_sample = do_sample
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.n = 0
        self.forward_calls = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0

    def reset(self, n: int) -> None:
        """Start ``n`` new conversations (drops any cache)."""
        self.n = n
        self._rendered: list[str] = [""] * n
        self._ids: list[list[int]] = [[] for _ in range(n)]
        self._cache: Any = None
        self._mask: Any = None  # (n, cache length) 1 = real token
        self._length = [0] * n  # real tokens per conversation (the next position id)

    # -- prompt text ---------------------------------------------------------------------------------

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def _new_chunks(self, conversations: Sequence[list[dict[str, str]]]) -> list[list[int]]:
        """Each conversation's new text as token ids. Conversations of the batch that are equal (a branch's
        futures before they part) are rendered once, and equal new texts tokenized once."""
        rendered: dict[tuple, str] = {}
        encoded: dict[str, list[int]] = {}
        chunks = []
        for i, messages in enumerate(conversations):
            key = tuple(tuple(m.items()) for m in messages)
            if key not in rendered:
                rendered[key] = self.render(messages)
            text = rendered[key]
            old = self._rendered[i]
            if not text.startswith(old):
                raise ValueError(
                    "conversation does not extend the previous step's (an earlier turn changed, or the chat "
                    "template rewrites earlier turns); call reset() to start new conversations"
                )
            new = text[len(old):]
            if new not in encoded:
                encoded[new] = self.tokenizer(new, add_special_tokens=False)["input_ids"]
            self._rendered[i] = text
            chunks.append(list(encoded[new]))
        return chunks

    # -- model calls ---------------------------------------------------------------------------------

    def _forward(self, chunks: list[list[int]]) -> Any:
        """Append ragged chunks (left-padded, masked) to the cache; returns last-position logits."""
        import torch
        from transformers import DynamicCache

        device = self.model.device
        width = max(len(c) for c in chunks)
        ids = torch.full((self.n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((self.n, width), dtype=torch.long)
        pos = torch.zeros((self.n, width), dtype=torch.long)
        for i, c in enumerate(chunks):
            if c:
                ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
                mask[i, width - len(c):] = 1
                pos[i, width - len(c):] = torch.arange(self._length[i], self._length[i] + len(c))
                pos[i, : width - len(c)] = self._length[i]
                self._length[i] += len(c)
            else:
                pos[i, :] = self._length[i]
        self._mask = mask if self._mask is None else torch.cat([self._mask, mask], dim=1)
        if self._cache is None:
            self._cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids.to(device),
            attention_mask=self._mask.to(device),
            position_ids=pos.to(device),
            past_key_values=self._cache,
            use_cache=True,
        )
        self.forward_calls += 1
        return out.logits[:, -1, :].float()

    def _pick(self, logits: Any, generator: Any) -> Any:
        import torch

        if not self.do_sample:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / max(self.temperature, 1e-5), dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(dim=-1) - sorted_p < self.top_p
            sorted_p = sorted_p * keep
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        if generator is not None and generator.device != probs.device:  # a CPU generator beside GPU logits: draw on
            return torch.multinomial(probs.float().cpu(), 1, generator=generator).squeeze(-1).to(probs.device)  # its side
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    def step(self, conversations: Sequence[list[dict[str, str]]], *, generator: Any = None) -> list[Turn]:
        """The next reply of every conversation (each ends on its newest user turn)."""
        import torch

        if len(conversations) != self.n:
            raise ValueError(f"engine holds {self.n} conversations, got {len(conversations)}")
        chunks = self._new_chunks(conversations)
        for i, c in enumerate(chunks):
            self._ids[i].extend(c)
        self.prefill_tokens += sum(len(c) for c in chunks)
        with torch.inference_mode():
            logits = self._forward(chunks)
            start = self._mask.shape[1]
            saved_length = list(self._length)
            stops = torch.tensor(self.stop_ids)
            done = torch.zeros(self.n, dtype=torch.bool)
            replies: list[list[int]] = [[] for _ in range(self.n)]
            for k in range(self.max_new_tokens):
                token = self._pick(logits, generator).cpu()
                for i in range(self.n):
                    if not done[i]:
                        replies[i].append(int(token[i]))
                done |= torch.isin(token, stops)
                if bool(done.all()) or k == self.max_new_tokens - 1:
                    break
                # finished conversations take a masked pad, so every row advances together
                step_chunks = [[] if done[i] else [int(token[i])] for i in range(self.n)]
                logits = self._forward(step_chunks)
                self.decode_tokens += sum(1 for c in step_chunks if c)
            # cut the reply back out: the next step re-encodes it as the template writes it
            self._cache.crop(-(self._mask.shape[1] - start))  # transformers 5: a negative count of tokens to drop
            self._mask = self._mask[:, :start]
            self._length = saved_length
        turns = []
        stop_set = set(self.stop_ids)
        for i, tokens in enumerate(replies):
            text_ids = [t for t in tokens if t not in stop_set]
            text = self.tokenizer.decode(text_ids, skip_special_tokens=True).strip()
            cut = not tokens or tokens[-1] not in stop_set
            turns.append(Turn(text=text, completion_ids=tokens, prompt_ids=list(self._ids[i]), cut=cut))
        return turns


def reencode_reply(model: Any, tokenizer: Any, messages: list[dict[str, str]], *, stop_ids: Sequence[int],
                   max_new_tokens: int) -> str:
    """Greedy reply to one conversation, re-encoding it whole with no cache kept between turns: the
    plain transformers loop (``generate`` on the full prompt) that :class:`LockstepChat` must equal."""
    import torch

    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=list(stop_ids), pad_token_id=int(tokenizer.pad_token_id),
                             repetition_penalty=1.0)
    new = out[0, ids.shape[1]:].tolist()
    stop = set(stop_ids)
    n = next((k for k, t in enumerate(new) if t in stop), len(new))
    return tokenizer.decode(new[:n], skip_special_tokens=True).strip()
