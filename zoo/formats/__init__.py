"""File formats that recipes and evaluators both read (one module per format), below both in the layers:

- :mod:`lavo_zoo.formats.pcd`: PCL's ``.pcd`` point clouds (ascii, binary, binary_compressed), read and written
- :mod:`lavo_zoo.formats.text`: UTF-8 lines and JSON lines, with errors naming the file and line
- :mod:`lavo_zoo.formats.multinews`: Multi-News' text conventions (article separator, newlines, the summary mark)
"""
