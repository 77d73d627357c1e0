"""Trainer integrations: one callback per framework, each an optional extra of ett-client.

``ett_client.integrations.lightning`` (``pip install 'ett-client[lightning]'``) and
``ett_client.integrations.transformers`` (``pip install 'ett-client[transformers]'``).
Importing this package imports neither framework.
"""
