"""The compiler cache a lane build uses: the selection (`select`), the one sccache server
of a build (`session`), the sccache-dist client (`dist`). Imports nothing of `lanes`."""
