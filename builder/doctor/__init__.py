"""``wheelwright doctor``: read a user's environment, say per package what is wrong in one sentence, print the one
install line that fits. Every module here is standard-library only (plus builder.core's stdlib readers), because
``standalone.py`` concatenates them into the ``doctor.py`` the index site publishes."""
