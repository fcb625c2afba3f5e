"""The command-like text of a Markdown document, for the doc checkers (test_layout, test_doc_commands):
each line of a fenced code block (cut at its shell comment) and each backtick span of other lines."""
import os
import re


def command_spans(root, rel, comment="#"):
    """(line number, text) for every code-block line of root/rel, cut before `comment`, and every
    backtick span outside code blocks."""
    in_block = False
    for no, line in enumerate(open(os.path.join(root, rel)).read().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        for span in ([line.split(comment)[0]] if in_block else re.findall(r"`([^`]+)`", line)):
            yield no, span
