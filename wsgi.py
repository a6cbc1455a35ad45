from jobsweb import create_app

app = create_app()
