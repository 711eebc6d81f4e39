"""The length models (`kind:` of prompt_tokens, response_tokens and every other length), one file each in this folder:
its parameter class, the fields the YAML gives it, and the builder of its distribution, registered together with
`@register_length_model(<class>)` (rlsim.workload.lengths). Importing this package imports every file in it, so a new
length model is a new file and nothing else: the scenario's schema accepts every registered kind.
"""
import pkgutil
from importlib import import_module

for _module in pkgutil.iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")
