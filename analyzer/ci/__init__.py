"""Continuous-integration glue: the pull-request comment the GitHub Action (``action.yml``) posts."""
