"""Dataset loaders that read the standard file formats (see SPEC "Data")."""
