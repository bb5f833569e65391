//! Prompting, sampling, generation and the model store. Knows nothing of windows.
