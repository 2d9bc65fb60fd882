"""Models and weights read from files: your state dicts, attention files, trained models, the shipped ones."""
