def upgrade(task):
    return task
