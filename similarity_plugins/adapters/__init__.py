"""Model adapters: a model wrapped with what it reads a sample with (a Hugging Face model with its tokenizer or
image processor and pooling rule: `hf`; a model with its own preprocessing inside it: `preprocessed`), and the
text data they read. The runner and the services see a wrapped model only through the Protocol of
`networks.wrapped`."""
