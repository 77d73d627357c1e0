"""The v1 wire contract: one event's validation, a batch's validation into storable rows,
and the JSON Schema published in the OpenAPI document."""
