"""The three local engines behind small interfaces: speech-to-text, the language model, text-to-speech.

Each engine loads its weights from a local path; `models.weights` says where the defaults come from.
"""
