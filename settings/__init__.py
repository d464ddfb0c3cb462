"""The settings: the grammar of setting values (`values`), where a stack keeps its runs
(`checkpoint_storage`), every stack key declared once (`stack`) and the component's typed
arguments generated from those declarations (`args`, `args_codegen`).

Nothing of the project below it, and no Pulumi runtime state: the program, the offline render,
the local run and the cluster all read a stack through it. Import the module you need
(`from settings.stack import StackSettings`); this package re-exports nothing.
"""
