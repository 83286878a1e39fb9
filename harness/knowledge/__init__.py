"""Knowledge bases for evaluations: the questions over the license texts and over a household's own
notes (household/), each question with the pattern a right answer matches."""
