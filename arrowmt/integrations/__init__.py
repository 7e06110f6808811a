"""Layer 15, integrations with other libraries: Hugging Face ``datasets`` (:mod:`arrowmt.integrations.hf`)
and the fairseq plugin (``arrowmt/integrations/fairseq_plugin``, a fairseq ``--user-dir``).
"""
