"""Who may do what: bearer-token authentication, roles and scopes, and the token store."""
