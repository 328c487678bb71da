"""The static package index: PEP 503/691/658 pages per variant, a landing page, local serving and S3 publish."""
