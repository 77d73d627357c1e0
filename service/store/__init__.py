"""The database: connections and the embedded server, the schema and its migrations, the
event store, the result store, read queries and retention. SQL lives here and nowhere else;
nothing here commits on a caller's behalf."""
