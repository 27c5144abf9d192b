"""The package itself: ``depthlab.train`` and the other names it loads on first use."""





def test_package_exports_the_train_function():
    import importlib

    import depthlab
    import depthlab.analytics  # noqa: F401 - importing submodules must not shadow the function

    importlib.import_module("depthlab.trainer")
    assert callable(depthlab.train) and depthlab.train.__name__ == "train"
