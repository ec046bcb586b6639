"""Command-line interfaces: each command parses flags, calls one library function, prints where the
output went. Library errors become one-line ``Error: ...`` messages with a non-zero exit."""
