"""Many small objects at once (a build's task summaries, its staging): read_jsons and delete_tree on the emulator."""

from nanodata import storage


def test_read_jsons_keeps_order_and_misses_and_delete_tree_removes_every_object(gcs_bucket):
    prefix = f"gs://{gcs_bucket}/stage"
    for i in range(40):
        storage.write_json(f"{prefix}/s/{i:05d}.json", {"i": i})
    uris = [f"{prefix}/s/{i:05d}.json" for i in range(42)]  # the last two were never written
    assert storage.read_jsons(uris) == [{"i": i} for i in range(40)] + [None, None]
    assert storage.delete_tree(prefix) == 40
    assert storage.list_names(prefix) == [] and storage.read_jsons(uris[:3]) == [None] * 3
