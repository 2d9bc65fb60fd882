"""Measures and words about a run: analysis against chance, comparisons, the lesson, the quiz, the sentences."""
