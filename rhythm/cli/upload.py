"""``rhythm upload``: put teacher data (with a dataset card) or a trained student on the Hugging Face Hub."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


def upload_command(
    files: Annotated[Optional[list[str]], typer.Option("--files", help="Files (JSONL episodes) or run folders; repeat or list several.")] = None,
    repo: Annotated[Optional[str], typer.Option("--repo", help="Hub repo id: user/name (a dataset defaults to YOU/rhythm-teacher, from whoami).")] = None,
    repo_type: Annotated[str, typer.Option("--repo-type", help="dataset (default) or model.")] = "dataset",
    private: Annotated[bool, typer.Option("--private", help="Create the repo private (an existing repo keeps its visibility).")] = False,
    no_card: Annotated[bool, typer.Option("--no-card", help="Do not write README.md.")] = False,
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Commit message.")] = None,
    extra: Annotated[Optional[list[str]], typer.Argument(help="More files (so --files a.jsonl b.jsonl works).", show_default=False)] = None,
) -> None:
    """Create the repo if needed and upload the files in one commit, with a card computed from them.

    \b
    Examples:
      rhythm upload --files data/teacher_30ep.jsonl      # -> YOU/rhythm-teacher
      rhythm upload --files runs/sft --repo me/rhythm-sft --repo-type model
    """
    import sys

    from rhythm.cli.ui import err_console
    from rhythm.errors import RhythmError
    from rhythm.train.hub import upload, upload_pairs
    from rhythm.train.repos import DATA_REPO, RepoChoice, repos_line, user_repo

    paths = [*(files or []), *(extra or [])]
    if not paths:
        raise RhythmError("nothing to upload; pass --files FILE... (e.g. --files data/teacher_30ep.jsonl)")
    upload_pairs(paths)  # a missing file is named before the Hub is asked for a default repo
    if not repo:
        if repo_type != "dataset":
            raise RhythmError("--repo user/name is required for a model upload")
        repo = user_repo(DATA_REPO, "--repo")
        err_console.print(repos_line([RepoChoice("data", repo, derived=True)]), markup=False, highlight=False)
    result = upload(paths, repo, repo_type=repo_type, private=private, card=not no_card,
                    commit_message=message)
    err_console.print(f"uploaded {len(result.files)} files to {result.repo_url}")
    for note in result.notes:
        err_console.print(note, markup=False, highlight=False)
    sys.stdout.write(f"{result.repo_url}\t{result.commit_url}\n")
