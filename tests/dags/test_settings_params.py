"""The corpus DAG's Params are the chunk settings' (nanodata.settings): one Param per setting that has one, with its
default, and the chunk tasks build the config those defaults mean. A Param typed again in the DAG file with another
default or name fails here."""

from dataclasses import fields

from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.settings import ChunkSettings, from_params, param_specs


def test_the_dag_has_a_param_for_every_setting_with_its_default(dagbag):
    params = dagbag.dags["nanodata_cpp_corpus"].params
    specs = param_specs()
    for f in fields(ChunkSettings):
        if not f.metadata["param"]:
            continue
        assert f.name in params, f"{f.name}: no Param"
        assert params[f.name] == specs[f.name]["default"], f.name
    defaults = {name: params[name] for name in params}
    from_dag, default = ChunkConfig(**from_params(defaults)), ChunkConfig()
    for f in fields(ChunkSettings):
        assert getattr(from_dag, f.name) == getattr(default, f.name), f.name


def test_the_form_shows_each_settings_title_and_help(dagbag):
    params = dagbag.dags["nanodata_cpp_corpus"].params
    for name, spec in param_specs().items():
        param = params.get_param(name)
        assert param.schema["title"] == spec["title"] and param.description == spec["description"], name
        assert param.schema["type"] == spec["type"], name
