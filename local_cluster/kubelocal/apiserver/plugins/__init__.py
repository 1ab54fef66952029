"""Admission plugins beyond NamespaceLifecycle, each a module (kube-apiserver's `plugin/pkg/admission`
and the built-in kinds' defaulting and validation). `ApiServer` registers the built-in ones; the
ServiceAccount plugin is registered by `LocalCluster`, which also runs the controller that creates the
`default` ServiceAccounts it looks up."""

from .builtin_defaults import BuiltinDefaults
from .builtin_validation import BuiltinValidation
from .cel_rules import CelValidationRules
from .resourcequota import ResourceQuotaAdmission
from .serviceaccount import ServiceAccountAdmission
from .webhooks import AdmissionWebhooks

__all__ = ["AdmissionWebhooks", "BuiltinDefaults", "BuiltinValidation", "CelValidationRules", "ResourceQuotaAdmission",
           "ServiceAccountAdmission"]
