"""File formats that recipes and evaluators both read (one module per format), below both in the layers:
:mod:`lavo_zoo.formats.pcd` (PCL point clouds)."""
