"""The five seed APIs as pydantic models, one module per API group."""
