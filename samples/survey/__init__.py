"""The paper's survey application: workflows, an HTTP API, a load generator and a checker.

See ``README.md`` beside this file; ``python -m samples.survey --help`` lists the commands.
"""

from samples.survey.workflows import (
    RESPONSES,
    SUMMARIES,
    SURVEYS,
    TABLES,
    WORKFLOWS,
    Invalid,
    NewSurvey,
    Response,
    Survey,
    Verdict,
    check,
    create_survey,
    respond,
    results,
    survey,
)

__all__ = [
    "RESPONSES",
    "SUMMARIES",
    "SURVEYS",
    "TABLES",
    "WORKFLOWS",
    "Invalid",
    "NewSurvey",
    "Response",
    "Survey",
    "Verdict",
    "check",
    "create_survey",
    "respond",
    "results",
    "survey",
]
