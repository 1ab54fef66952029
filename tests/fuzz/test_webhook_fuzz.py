"""The admission webhook's validation and defaulting on generated TFJobs: it refuses with field-named messages
(the same words `tfjob render` prints), or admits a job the API server stores and the defaulted job stays valid."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fuzz_documents import mutated_job
from fuzz_oracle import FIELD_NAMED, tfjob_refusals
from fuzz_settings import FUZZ, SEED
from hypothesis import given, seed

from tfjob_operator.api.validation import InvalidSpec, parse_tfjob
from tfjob_operator.serving.webhook import admission_messages, with_defaults

pytestmark = pytest.mark.timeout(600)


@FUZZ
@seed(SEED)
@given(doc=mutated_job())
def test_webhook_refuses_naming_fields_or_admits_what_the_api_server_stores(doc: Any) -> None:
    # The API server hands the webhook a JSON object: what YAML can say but JSON cannot is not a request.
    doc = yaml.safe_load(yaml.safe_dump(doc))
    if not isinstance(doc, dict):
        return
    messages = admission_messages(doc)
    if messages:
        assert all(FIELD_NAMED.match(f"  {m}") for m in messages), messages
        with pytest.raises(InvalidSpec) as refused:
            parse_tfjob(doc)
        assert refused.value.messages == messages  # one validation: the CLI and the operator say the same
        return
    assert tfjob_refusals(doc) == []
    defaulted = with_defaults(doc)
    assert admission_messages(defaulted) == [] and tfjob_refusals(defaulted) == []
