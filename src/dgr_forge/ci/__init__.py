"""CI generated from the recipes: the one lane `matrix` and the workflow files rendered from
it (`render`), the one install step of every job (`install`), the templates (`templates/`)."""
