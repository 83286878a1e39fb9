"""The history-fitting core (ADR 0140, amended by ADR 0141): pure functions over chat messages.

No I/O and no imports from `models/` or `voice/`: callers pass a `measure(messages) -> tokens`
callable (the model's tokenizer, or `estimate`) and, for summaries and section workers, a
`generate(messages) -> text` callable.
"""

from fitting.fit import FitError, FitResult, Step, fit
from fitting.measure import Counter, estimate
from fitting.summary import Summary

__all__ = ["Counter", "FitError", "FitResult", "Step", "Summary", "estimate", "fit"]
