"""Input and output: where text comes from and where files go (inputs, samples, atomic files, npz/json)."""
