"""What a listener heard of a spoken reply.

A spoken reply's stored row keeps a timeline of its sentences with their audio offsets, so
`conversation.item.truncate` can trim the stored reply to what the listener actually heard.
"""

from __future__ import annotations


def heard_text(timeline: list[list], audio_end_ms: int) -> str:
    """What a listener heard of a reply when playback stopped at `audio_end_ms`.

    `timeline` holds [sentence, start_ms, end_ms] for each spoken sentence; a sentence cut off
    midway keeps the share of its words that was played.
    """
    heard = []
    for sentence, start, end in timeline:
        if audio_end_ms >= end:
            heard.append(sentence)
        elif audio_end_ms > start:
            words = sentence.split()
            share = (audio_end_ms - start) / max(1, end - start)
            kept = words[: int(len(words) * share)]
            if kept:
                heard.append(" ".join(kept) + "…")
            break
        else:
            break
    return " ".join(heard)
